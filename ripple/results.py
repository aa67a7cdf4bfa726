"""`ripple results NAME`: where a recorded pipeline's results tables are and how to read them.

Owns the command's lines: each table's location in the store (the workers' `--store`, given
the same way as to `ripple produce` and `ripple pipelines drop --purge`: `--store`, else
`ripple up`'s `file://<data-dir>/store`), its committed files (and, in a local store, rows,
read from the Parquet footers), and snippets that read it with Spark SQL, DuckDB and pandas
(no Ripple code on the reading side). Invariant: it only reads: the describe view and a
listing of the store, nothing is written.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from pipeline.spec.results import SNAPSHOT, WINDOWS, table_prefix
from pipeline.store import ObjectStore, open_store
from ripple.connect import client_for
from ripple.pipeline_commands import store_uri
from shared.errors import RippleError

__all__ = ["ROWS_FILES_MAX", "TableInfo", "add_results_parser", "results_command", "table_info"]

# Rows are counted (from each file's footer) only in a local store and up to this many files:
# more would make a quick look slow.
ROWS_FILES_MAX = 1024
TABLES = (SNAPSHOT, WINDOWS)
WHAT = {
    SNAPSHOT: "the current outputs of every key, replaced at each published checkpoint",
    WINDOWS: "final windows, appended once each",
}


@dataclass(frozen=True, slots=True)
class TableInfo:
    name: str
    uri: str  # the store's URI of the table's directory
    files: int  # committed Parquet files
    rows: int | None  # None: not counted (a remote store, or too many files)


def _committed(key: str) -> bool:
    # Readers skip names starting with "." or "_" (temp and version files): so does this.
    base = key.rsplit("/", 1)[-1]
    return base.endswith(".parquet") and not base.startswith((".", "_"))


def table_info(store: ObjectStore, name: str, incarnation: int, table: str) -> TableInfo:
    """One table's location and counts, from a listing of the store."""
    prefix = table_prefix(name, incarnation, table)
    files = [k for k in store.list_keys(prefix) if _committed(k)]
    rows: int | None = None
    paths = [store.local_path(k) for k in files]
    if len(files) <= ROWS_FILES_MAX and all(p is not None for p in paths):
        import pyarrow.parquet as pq

        rows = sum(pq.read_metadata(p).num_rows for p in paths if p is not None)
    directory = store.uri(prefix.rstrip("/")) + "/"
    return TableInfo(name=table, uri=directory, files=len(files), rows=rows)


def _snippets(uri: str, s3_endpoint: str | None) -> list[str]:
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        path = parsed.path
        return [
            f'  Spark SQL: spark.read.parquet("{uri}")   or   SELECT * FROM parquet.`{uri}`',
            f"  DuckDB:    SELECT * FROM read_parquet('{path}*.parquet');",
            f'  pandas:    pandas.read_parquet("{path}")',
        ]
    s3a = "s3a://" + uri[len("s3://") :]
    if s3_endpoint is None:  # AWS itself: credentials and region from the environment
        duckdb_setup = "CREATE SECRET (TYPE s3, PROVIDER credential_chain);"
        spark_note = "(hadoop-aws)"
        pandas_options = ""
    else:
        endpoint = urlparse(s3_endpoint)
        # DuckDB wants the endpoint's host:port, TLS and path-style addressing apart.
        duckdb_setup = (
            f"SET s3_endpoint='{endpoint.netloc}'; "
            f"SET s3_use_ssl={'true' if endpoint.scheme == 'https' else 'false'}; "
            "SET s3_url_style='path';"
        )
        spark_note = f"(hadoop-aws; fs.s3a.endpoint={s3_endpoint}, path style access)"
        pandas_options = (
            f', storage_options={{"client_kwargs": {{"endpoint_url": "{s3_endpoint}"}}}}'
        )
    return [
        f'  Spark SQL: spark.read.parquet("{s3a}")   {spark_note}',
        f"  DuckDB:    INSTALL httpfs; LOAD httpfs; {duckdb_setup}",
        f"             SELECT * FROM read_parquet('{uri}*.parquet');",
        f'  pandas:    pandas.read_parquet("{uri}"{pandas_options})   (s3fs)',
    ]


def render_results(
    described: dict[str, Any], tables: list[TableInfo], s3_endpoint: str | None
) -> str:
    lines = [f"pipeline {described['name']} (incarnation {described['incarnation']}): results"]
    for t in tables:
        rows = "" if t.rows is None else f", {t.rows} rows"
        lines.append("")
        lines.append(f"{t.name}: {WHAT[t.name]}")
        lines.append(f"  {t.uri}   ({t.files} files{rows})")
        if t.files == 0:
            lines.append("  (no file yet: nothing published to this table)")
            continue
        lines.extend(_snippets(t.uri, s3_endpoint))
    return "\n".join(lines)


def _store(args: argparse.Namespace) -> ObjectStore:
    uri = store_uri(args)
    local = urlparse(uri)
    if local.scheme == "file" and not Path(local.path).is_dir():
        raise RippleError(f"no store at {uri}: give the cluster's with --store", code="usage")
    return open_store(uri, args.s3_endpoint)


async def results_command(args: argparse.Namespace) -> int:
    store = _store(args)
    async with client_for(args) as client:
        described = await client.get(f"/v1/pipelines/{quote(args.name, safe='')}")
    name, incarnation = str(described["name"]), int(described["incarnation"])
    tables = [table_info(store, name, incarnation, t) for t in TABLES]
    if args.json:
        body = {
            "name": name,
            "incarnation": incarnation,
            "tables": {t.name: {"uri": t.uri, "files": t.files, "rows": t.rows} for t in tables},
        }
        print(json.dumps(body, indent=2, sort_keys=True))
    else:
        print(render_results(described, tables, args.s3_endpoint))
    return 0


def add_results_parser(sub: Any, client_args: Any) -> None:
    r = sub.add_parser("results", help="where a pipeline's results tables are and how to read them")
    client_args(r)
    r.add_argument("name", metavar="NAME")
    r.add_argument("--store", help="the cluster's store (default: file://<data-dir>/store)")
    r.add_argument("--s3-endpoint")
