"""A spec run micro-batch by micro-batch equals the same spec as one Spark batch job, exactly.

The done-when of a pipeline spec: an HLL distinct count and a mean (and every other output)
merged from per-batch partial states equal the one batch job's, for several random splits of
the rows into batches, sketch estimates included (equal, not close).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipeline.spec.oracle import Incremental, batch_job
from shared.spec.parse import load_spec_file, parse_spec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "orders.toml"
ROWS = 3000
CUSTOMERS = 20
SEED = 37

SPEC = """
[schema]
ddl = "customer STRING, order_id STRING, amount DECIMAL(12,2), currency STRING, ts TIMESTAMP"
key = "customer"

[transform]
source = '''
def transform(df):
    df = df[df["amount"].isna() | (df["amount"] > 0)]
    return df.assign(currency=df["currency"].str.upper())
'''
"""
AGGREGATIONS = [
    ("orders", "count", None, None),
    ("priced", "count", "amount", None),
    ("revenue", "sum", "amount", None),
    ("currencies", "approx_distinct", "currency", None),
    ("distinct_orders", "approx_distinct", "order_id", 5),  # few buckets: HLL mode, estimates
    ("mean_amount", "mean", "amount", None),
    ("smallest", "min", "amount", None),
    ("largest", "max", "amount", None),
    ("first_order_at", "first", "ts", None),
    ("last_order_at", "last", "ts", None),
    ("last_currency", "last", "currency", None),
]


def spec_text() -> str:
    parts = [SPEC]
    for name, fn, column, k in AGGREGATIONS:
        parts.append(f'[[aggregations]]\nname = "{name}"\nfn = "{fn}"\n')
        if column is not None:
            parts.append(f'column = "{column}"\n')
        if k is not None:
            parts.append(f"lg_config_k = {k}\n")
    return "".join(parts)


def orders(rng: random.Random) -> pa.Table:
    start = datetime(2026, 1, 1)
    currencies = ["eur", "USD", "gbp", "JPY", "chf", "Sek", "nok", "DKK"]
    rows: dict[str, list[Any]] = {c: [] for c in ("customer", "order_id", "amount", "currency")}
    rows["ts"], rows["offset"] = [], []
    for offset in range(ROWS):
        customer = f"c{rng.randrange(CUSTOMERS):02d}"
        rows["customer"].append(customer)
        rows["order_id"].append(f"o{rng.randrange(ROWS // 2)}")
        cents = rng.randrange(-2000, 50000)  # some refunds, which the transform drops
        rows["amount"].append(None if rng.random() < 0.02 else Decimal(cents).scaleb(-2))
        # Each customer uses a few currencies, so the distinct counts differ per key.
        rows["currency"].append(currencies[(int(customer[1:]) + rng.randrange(3)) % 8])
        rows["ts"].append(start + timedelta(seconds=rng.randrange(10**7)))
        rows["offset"].append(offset)
    schema = pa.schema(
        [
            ("customer", pa.string()),
            ("order_id", pa.string()),
            ("amount", pa.decimal128(12, 2)),
            ("currency", pa.string()),
            ("ts", pa.timestamp("us")),
            ("offset", pa.int64()),
        ]
    )
    return pa.table(rows, schema=schema)


def splits(table: pa.Table, rng: random.Random) -> Iterator[list[pa.Table]]:
    """Three splits: contiguous offset ranges (as a worker's batches are), then rows dealt at
    random to 3 and to 5 batches (any split must do)."""
    cuts = sorted(rng.sample(range(1, table.num_rows), 3))
    bounds = [0, *cuts, table.num_rows]
    yield [table.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
    for n in (3, 5):
        dealt: list[list[int]] = [[] for _ in range(n)]
        for i in range(table.num_rows):
            dealt[rng.randrange(n)].append(i)
        yield [table.take(pa.array(idx, pa.int64())) for idx in dealt]


@pytest.fixture(scope="module")
def spark(spark_remote: str) -> SparkSession:
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(spark_remote).getOrCreate()


def python_reference(table: pa.Table) -> dict[str, dict[str, Any]]:
    """The exact outputs computed here from the rows (the transform done by hand): the batch
    job itself must be right, not only equal to the merged result."""
    out: dict[str, dict[str, Any]] = {}
    for r in sorted(table.to_pylist(), key=lambda r: r["offset"]):
        if r["amount"] is not None and r["amount"] <= 0:
            continue
        o = out.setdefault(r["customer"], {"orders": 0, "priced": 0, "revenue": None})
        o["orders"] += 1
        o.setdefault("first_currency", r["currency"].upper())
        o["last_currency"] = r["currency"].upper()
        o.setdefault("currencies_exact", set()).add(r["currency"].upper())
        if r["amount"] is not None:
            o["priced"] += 1
            o["revenue"] = r["amount"] + (o["revenue"] or 0)
            o["smallest"] = min(o.get("smallest", r["amount"]), r["amount"])
            o["largest"] = max(o.get("largest", r["amount"]), r["amount"])
    return out


def test_merged_batches_equal_the_batch_job_for_every_split(spark: SparkSession) -> None:
    rng = random.Random(SEED)
    spec = parse_spec(spec_text())
    table = orders(rng)
    want = batch_job(spark, spec, table)

    reference = python_reference(table)
    assert set(want) == set(reference)
    for key, ref in reference.items():
        got = want[key]
        for name in ("orders", "priced", "revenue", "smallest", "largest", "last_currency"):
            assert got[name] == ref[name], (key, name)
        assert got["currencies"] == len(ref["currencies_exact"])  # few values: exact
        assert got["mean_amount"] == (ref["revenue"] / ref["priced"]).quantize(Decimal("0.000001"))
    # With 32 buckets some estimate is not the exact count: the sketches are in HLL mode.
    exact_orders = {
        k: len(set(table.filter(pc.equal(table["customer"], k))["order_id"].to_pylist()))
        for k in want
    }
    assert any(want[k]["distinct_orders"] != exact_orders[k] for k in want)

    for batches in splits(table, rng):
        incremental = Incremental(spark, spec)
        for batch in batches:
            incremental.add(batch)
        assert incremental.results() == want, [b.num_rows for b in batches]


def test_the_example_spec_runs_on_spark(spark: SparkSession) -> None:
    spec = load_spec_file(EXAMPLE)
    table = orders(random.Random(SEED + 1)).drop_columns(["order_id"]).slice(0, 600)
    want = batch_job(spark, spec, table)
    assert sum(v["orders"] for v in want.values()) == sum(
        1 for a in table["amount"].to_pylist() if a is not None and a > 0
    )
    incremental = Incremental(spark, spec)
    for batch in (table.slice(0, 250), table.slice(250)):
        incremental.add(batch)
    assert incremental.results() == want
