"""Choosing the state engine: candidate stores for a partition's state under the pipeline's
access pattern, each in its own process, in one run on one machine (docs/state.md).

Candidates: a Python dict (today's state), SQLite (stdlib; WAL, one WITHOUT ROWID table),
LMDB (`lmdb`), RocksDB (`rocksdict`) and DuckDB (`duckdb`). Each engine keeps its rows and a
dirty mark per changed key in one write (a transaction or a write batch), as a delta
checkpoint needs. The workload: N distinct keys loaded; rounds where 1% of the keys are read
and updated in one batch (get_many + put_many) and a few new keys inserted; single-key read
latency; the changed rows taken since the last mark (a delta); the whole state exported in key
order and streamed into a fresh store (a base written, then loaded); bytes on disk and the
child's RSS growth.

Last, the chosen engine's store (`pipeline.spec.state_store`) and the checkpoint encoding
(`pipeline.spec.state_delta`): the bytes of a delta with 1% of keys touched beside a base's.

`python -m bench.state_engines child ENGINE KEYS DIR` is one engine's run (JSON on stdout).
"""

from __future__ import annotations

import datetime
import decimal
import json
import os
import random
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

from bench.stats import percentile
from pipeline.spec.state_codec import pack_key, pack_value
from pipeline.spec.state_delta import (
    ChainStats,
    CheckpointId,
    Header,
    encode_base,
    encode_delta,
    header_of,
)
from pipeline.spec.state_store import StateStore

ENGINES = ("dict", "sqlite", "lmdb", "rocksdb", "duckdb")
KEYS_QUICK, KEYS_FULL = 20_000, 1_000_000
ROUNDS_QUICK, ROUNDS_FULL = 5, 10
TOUCHED_FRACTION = 0.01  # of the keys read and updated per round (per checkpoint interval)
NEW_KEYS_PER_ROUND = 100
LOAD_CHUNK_ROWS = 10_000  # rows per put_many while loading: one micro-batch's worth
POINT_READS = 2_000
# DuckDB loads keys a few thousand a second here (a full run's million would take minutes):
# it is measured at most at this many keys, which its row's `keys` column shows.
DUCKDB_KEYS_MAX = 100_000
# A full run measures these engines again at this multiple of the keys: whether their
# resident memory grows with the state (LMDB's mapped pages, a dict) or stays within bounds.
SCALED_ENGINES = ("lmdb", "rocksdb")
SCALE_FACTOR = 3
POINT_READS_SLOW = 200  # DuckDB answers a point query in milliseconds: fewer samples
LMDB_MAP_BYTES = 64 * 1024**3  # address space reserved, not disk: LMDB's file grows as used
SEED = 38

Row = tuple[bytes, bytes]


class Engine(Protocol):
    def put_many(self, rows: list[Row]) -> None: ...

    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...

    def take_delta(self) -> list[Row]: ...

    def export(self) -> Iterator[Row]: ...

    def import_rows(self, rows: Iterable[Row]) -> None: ...

    def close(self) -> None: ...


class DictEngine:
    def __init__(self, path: Path) -> None:
        self.rows: dict[bytes, bytes] = {}
        self.dirty: set[bytes] = set()

    def put_many(self, rows: list[Row]) -> None:
        for k, v in rows:
            self.rows[k] = v
            self.dirty.add(k)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return [self.rows.get(k) for k in keys]

    def take_delta(self) -> list[Row]:
        out = [(k, self.rows[k]) for k in sorted(self.dirty)]
        self.dirty = set()
        return out

    def export(self) -> Iterator[Row]:
        return iter(sorted(self.rows.items()))

    def import_rows(self, rows: Iterable[Row]) -> None:
        self.rows.update(rows)

    def close(self) -> None:
        pass


class SqliteEngine:
    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path / "state.db", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        for table in ("rows", "dirty"):
            self.db.execute(
                f"CREATE TABLE IF NOT EXISTS {table} "
                "(k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID"
            )

    def put_many(self, rows: list[Row]) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR REPLACE INTO rows VALUES (?, ?)", rows)
            self.db.executemany(
                "INSERT OR REPLACE INTO dirty VALUES (?, x'')", [(k,) for k, _ in rows]
            )

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        found: dict[bytes, bytes] = {}
        for i in range(0, len(keys), 500):  # SQLite's bound on host parameters
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            found.update(self.db.execute(f"SELECT k, v FROM rows WHERE k IN ({marks})", chunk))
        return [found.get(k) for k in keys]

    def take_delta(self) -> list[Row]:
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            out = self.db.execute(
                "SELECT rows.k, rows.v FROM dirty JOIN rows ON rows.k = dirty.k ORDER BY dirty.k"
            ).fetchall()
            self.db.execute("DELETE FROM dirty")
        return out

    def export(self) -> Iterator[Row]:
        return iter(self.db.execute("SELECT k, v FROM rows ORDER BY k"))

    def import_rows(self, rows: Iterable[Row]) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT INTO rows VALUES (?, ?)", rows)

    def close(self) -> None:
        self.db.close()


class LmdbEngine:
    def __init__(self, path: Path) -> None:
        import lmdb

        self.env = lmdb.open(str(path), map_size=LMDB_MAP_BYTES, max_dbs=2, sync=False)
        self.rows = self.env.open_db(b"rows")
        self.dirty = self.env.open_db(b"dirty")

    def put_many(self, rows: list[Row]) -> None:
        with self.env.begin(write=True) as txn:
            txn.cursor(self.rows).putmulti(rows)
            txn.cursor(self.dirty).putmulti([(k, b"") for k, _ in rows])

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        with self.env.begin() as txn:
            return [txn.get(k, db=self.rows) for k in keys]

    def take_delta(self) -> list[Row]:
        with self.env.begin(write=True) as txn:
            keys = list(txn.cursor(self.dirty).iternext(values=False))
            out = [(k, txn.get(k, default=b"", db=self.rows)) for k in keys]
            txn.drop(self.dirty, delete=False)
        return out

    def export(self) -> Iterator[Row]:
        with self.env.begin() as txn:
            yield from txn.cursor(self.rows)

    def import_rows(self, rows: Iterable[Row]) -> None:
        with self.env.begin(write=True) as txn:
            txn.cursor(self.rows).putmulti(rows, append=True)

    def close(self) -> None:
        self.env.close()


class RocksEngine:
    """The chosen engine as the worker will use it: `pipeline.spec.state_store`, its bounds."""

    def __init__(self, path: Path) -> None:
        self.store = StateStore.open(path)

    def put_many(self, rows: list[Row]) -> None:
        self.store.apply(rows, [])

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return self.store.raw_get_many(keys)

    def take_delta(self) -> list[Row]:
        return [(k, v) for k, v in self.store.take_delta().entries() if v is not None]

    def export(self) -> Iterator[Row]:
        return self.store.raw_rows()

    def import_rows(self, rows: Iterable[Row]) -> None:
        chunk: list[Row] = []
        for row in rows:
            chunk.append(row)
            if len(chunk) == LOAD_CHUNK_ROWS:
                self.store.append_new(chunk)  # the loader's path for a base (state_delta.load)
                chunk = []
        self.store.append_new(chunk)

    def close(self) -> None:
        self.store.close()


class DuckEngine:
    def __init__(self, path: Path) -> None:
        import duckdb

        self.db = duckdb.connect(str(path / "state.duckdb"))
        for table in ("rows", "dirty"):
            self.db.execute(f"CREATE TABLE IF NOT EXISTS {table} (k BLOB PRIMARY KEY, v BLOB)")

    def _upsert(self, table: str, rows: list[Row]) -> None:
        self.db.execute(f"CREATE OR REPLACE TEMP TABLE batch_{table} (k BLOB, v BLOB)")
        self.db.executemany(f"INSERT INTO batch_{table} VALUES (?, ?)", rows)
        self.db.execute(f"INSERT OR REPLACE INTO {table} SELECT k, v FROM batch_{table}")

    def put_many(self, rows: list[Row]) -> None:
        self.db.execute("BEGIN")
        self._upsert("rows", rows)
        self._upsert("dirty", [(k, b"") for k, _ in rows])
        self.db.execute("COMMIT")

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        found = dict(
            self.db.execute(
                "SELECT k, v FROM rows WHERE k IN (SELECT unnest(?))", [keys]
            ).fetchall()
        )
        return [found.get(k) for k in keys]

    def take_delta(self) -> list[Row]:
        self.db.execute("BEGIN")
        out = self.db.execute(
            "SELECT rows.k, rows.v FROM dirty JOIN rows ON rows.k = dirty.k ORDER BY rows.k"
        ).fetchall()
        self.db.execute("DELETE FROM dirty")
        self.db.execute("COMMIT")
        return [(bytes(k), bytes(v)) for k, v in out]

    def export(self) -> Iterator[Row]:
        cursor = self.db.execute("SELECT k, v FROM rows ORDER BY k")
        while chunk := cursor.fetchmany(LOAD_CHUNK_ROWS):
            yield from ((bytes(k), bytes(v)) for k, v in chunk)

    def import_rows(self, rows: Iterable[Row]) -> None:
        self.db.execute("BEGIN")
        self._upsert("rows", list(rows))
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()


OPENERS: dict[str, Callable[[Path], Engine]] = {
    "dict": DictEngine,
    "sqlite": SqliteEngine,
    "lmdb": LmdbEngine,
    "rocksdb": RocksEngine,
    "duckdb": DuckEngine,
}


def key_of(i: int) -> bytes:
    return pack_key(f"customer-{i:09d}")


def value_of(i: int, n: int) -> bytes:
    # A typical spec state: count, a DECIMAL sum, a mean's (sum, count), last's (offset, value).
    return pack_value(
        {
            "orders": n,
            "total": decimal.Decimal(f"{n * 12}.{i % 100:02d}"),
            "avg_basket": (n * 3, n),
            "last_seen": (i + n, datetime.datetime(2026, 11, 29, 12, i % 60)),
        }
    )


def _rss_bytes() -> int:
    # /proc/self/statm's second field: resident pages (Linux, as every bench here).
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


def child(engine: str, keys: int, root: Path) -> dict[str, float]:
    """One engine's figures: the workload above on `keys` keys in `root`."""
    rng = random.Random(SEED)
    rss0 = _rss_bytes()
    (root / "a").mkdir()
    store: Engine = OPENERS[engine](root / "a")
    t0 = time.perf_counter()
    for start in range(0, keys, LOAD_CHUNK_ROWS):
        end = min(keys, start + LOAD_CHUNK_ROWS)
        store.put_many([(key_of(i), value_of(i, 1)) for i in range(start, end)])
    load_s = _ms(t0) / 1000.0
    store.take_delta()  # the load is the base: the rounds' deltas start here
    rounds = ROUNDS_QUICK if keys <= KEYS_QUICK else ROUNDS_FULL
    touched = max(1, int(keys * TOUCHED_FRACTION))
    total = keys
    round_ms: list[float] = []
    delta_ms: list[float] = []
    delta_rows = 0
    for r in range(rounds):
        ids = rng.sample(range(total), touched)
        t0 = time.perf_counter()
        got = store.get_many([key_of(i) for i in ids])
        assert all(v is not None for v in got)
        fresh = range(total, total + NEW_KEYS_PER_ROUND)
        store.put_many(
            [(key_of(i), value_of(i, r + 2)) for i in ids]
            + [(key_of(i), value_of(i, 1)) for i in fresh]
        )
        round_ms.append(_ms(t0))
        total += NEW_KEYS_PER_ROUND
        t0 = time.perf_counter()
        delta_rows = len(store.take_delta())
        delta_ms.append(_ms(t0))
    reads = POINT_READS_SLOW if engine == "duckdb" else POINT_READS
    lat_us: list[float] = []
    for i in rng.sample(range(total), reads):
        key = [key_of(i)]
        t0 = time.perf_counter()
        store.get_many(key)
        lat_us.append(_ms(t0) * 1000.0)
    rss = _rss_bytes()  # before the copy below, which has a second store open
    t0 = time.perf_counter()
    exported = sum(1 for _ in store.export())
    export_s = _ms(t0) / 1000.0
    (root / "b").mkdir()
    other: Engine = OPENERS[engine](root / "b")
    t0 = time.perf_counter()
    other.import_rows(store.export())  # streamed: a base read while the new store loads
    copy_s = _ms(t0) / 1000.0
    other.close()
    store.close()
    assert exported == total
    return {
        "keys": float(total),
        "load_keys_per_s": keys / load_s,
        "round_ms": sorted(round_ms)[len(round_ms) // 2],
        "get_p50_us": percentile(lat_us, 50),
        "get_p99_us": percentile(lat_us, 99),
        "delta_rows": float(delta_rows),
        "delta_ms": sorted(delta_ms)[len(delta_ms) // 2],
        "export_s": export_s,
        "copy_s": copy_s,
        "disk_mib": _disk_bytes(root / "a") / 2**20,
        "rss_growth_mib": (rss - rss0) / 2**20,
    }


def checkpoint_bytes(keys: int, root: Path) -> dict[str, float]:
    """A base of `keys` keys beside a delta after an interval touching 1% of them (plus the new
    keys of a round), and after a compaction would replace the chain (`ChainStats`)."""
    rng = random.Random(SEED)
    store = StateStore.open(root / "ckpt")
    try:
        for start in range(0, keys, LOAD_CHUNK_ROWS):
            end = min(keys, start + LOAD_CHUNK_ROWS)
            store.apply([(key_of(i), value_of(i, 1)) for i in range(start, end)], [])
        store.take_delta()
        t0 = time.perf_counter()
        base_bytes, base_id = 0, CheckpointId(1, 1, 0)
        head: Header | None = None
        for piece in encode_base(base_id, store.raw_rows()):
            head = head or header_of(piece)
            base_bytes += len(piece)
        base_s = _ms(t0) / 1000.0
        assert head is not None
        touched = rng.sample(range(keys), max(1, int(keys * TOUCHED_FRACTION)))
        fresh = range(keys, keys + NEW_KEYS_PER_ROUND)
        store.apply(sorted([(key_of(i), value_of(i, 2)) for i in [*touched, *fresh]]), [])
        t0 = time.perf_counter()
        delta = b"".join(encode_delta(CheckpointId(1, 1, 1), head, store.take_delta()))
        delta_s = _ms(t0) / 1000.0
        stats = ChainStats(base_bytes=base_bytes)
        intervals = 0
        while not stats.needs_base():
            stats = stats.with_delta(len(delta))
            intervals += 1
    finally:
        store.destroy()
    return {
        "keys": float(keys),
        "base_mib": base_bytes / 2**20,
        "delta_kib": len(delta) / 2**10,
        "delta_pct_of_base": 100.0 * len(delta) / base_bytes,
        "base_encode_s": base_s,
        "delta_encode_s": delta_s,
        "deltas_before_new_base": float(intervals - 1),
    }


def run(quick: bool) -> dict[str, dict[str, float]]:
    # The harness only here: a child stays light (its RSS is the engine's).
    from bench.harness import run_json, scratch

    keys = KEYS_QUICK if quick else KEYS_FULL
    rows: dict[str, dict[str, float]] = {}
    for engine in ENGINES:
        with scratch(f"engine-{engine}") as root:
            n = min(keys, DUCKDB_KEYS_MAX) if engine == "duckdb" else keys
            argv = ["-m", "bench.state_engines", "child", engine, str(n), str(root)]
            rows[engine] = run_json(argv)
    for engine in () if quick else SCALED_ENGINES:
        with scratch(f"engine-{engine}-x{SCALE_FACTOR}") as root:
            argv = [
                "-m",
                "bench.state_engines",
                "child",
                engine,
                str(keys * SCALE_FACTOR),
                str(root),
            ]
            rows[f"{engine}_x{SCALE_FACTOR}"] = run_json(argv)
    with scratch("engine-checkpoint") as root:
        rows["checkpoint_1pct"] = checkpoint_bytes(keys, root)
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "child":
        figures = child(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
        print(json.dumps(figures))
    else:
        sys.exit(f"usage: python -m bench.state_engines child ENGINE KEYS DIR (one of {ENGINES})")
