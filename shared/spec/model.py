"""What a pipeline spec is, once parsed and validated, and its version id.

Owns the spec's value types and the canonical encoding its version is the hash of.
Invariant: a `PipelineSpec` is only built by `shared.spec.parse` after every check passed,
and `version` is sha256 over `canonical_bytes`, which holds everything that decides a result
(schema, key, the transform's exact source, the aggregations and their parameters, the window
if any) and
nothing else (TOML layout, comments, key order). Two specs with one version compute the same
outputs from the same rows.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass

from shared.spec.ddl import Schema

__all__ = [
    "FORMAT_VERSION",
    "AggFn",
    "AggregationSpec",
    "PipelineSpec",
    "TransformSpec",
    "WindowSpec",
]

# The spec format's own version: a reader refuses a format it does not know.
FORMAT_VERSION = 1


class AggFn(enum.Enum):
    """The aggregations a spec may name: each mergeable (an identity, an associative and
    commutative merge, the same result under any split of the input into batches)."""

    COUNT = "count"
    SUM = "sum"
    MIN = "min"
    MAX = "max"
    MEAN = "mean"
    FIRST = "first"  # the value at the smallest offset
    LAST = "last"  # the value at the largest offset
    APPROX_DISTINCT = "approx_distinct"  # Spark's HLL sketch (Apache DataSketches)


@dataclass(frozen=True, slots=True, kw_only=True)
class AggregationSpec:
    name: str  # the output's name
    fn: AggFn
    column: str | None  # None: count rows
    lg_config_k: int | None = None  # approx_distinct only: log2 of the sketch's buckets

    def encode(self) -> dict[str, object]:
        return {
            "name": self.name,
            "fn": self.fn.value,
            "column": self.column,
            "lg_config_k": self.lg_config_k,
        }


def _by_name(a: AggregationSpec) -> str:
    return a.name


@dataclass(frozen=True, slots=True, kw_only=True)
class TransformSpec:
    source: str  # the Python source, exactly as shipped (its bytes are part of the version)
    function: str  # the name, in that source, of `pandas.DataFrame -> pandas.DataFrame`
    output: Schema  # the columns it returns (besides `offset`)

    def encode(self) -> dict[str, object]:
        return {"source": self.source, "function": self.function, "output": self.output.ddl}


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowSpec:
    """Event-time windows over a TIMESTAMP column of the aggregated rows: each record belongs
    to the size/slide windows [start, start + size) that hold its event time, starts aligned
    to the epoch; a record older than the watermark minus `lateness_s` is late."""

    column: str
    size_s: int
    slide_s: int  # == size_s: tumbling
    lateness_s: int

    def encode(self) -> dict[str, object]:
        return {
            "column": self.column,
            "size_s": self.size_s,
            "slide_s": self.slide_s,
            "lateness_s": self.lateness_s,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineSpec:
    schema: Schema  # the record's columns as produced (besides `offset`)
    key: str
    transform: TransformSpec | None
    aggregations: tuple[AggregationSpec, ...]
    window: WindowSpec | None = None

    @property
    def aggregated(self) -> Schema:
        """The columns the aggregations read: the transform's output, or the record's."""
        return self.transform.output if self.transform is not None else self.schema

    def canonical_bytes(self) -> bytes:
        doc: dict[str, object] = {
            "format": FORMAT_VERSION,
            "schema": self.schema.ddl,
            "key": self.key,
            "transform": None if self.transform is None else self.transform.encode(),
            # By name: listing the outputs in another order changes no result.
            "aggregations": [a.encode() for a in sorted(self.aggregations, key=_by_name)],
        }
        if self.window is not None:  # absent otherwise: an unwindowed spec keeps its version
            doc["window"] = self.window.encode()
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    @property
    def version(self) -> str:
        """The spec's content address: what the replicated record holds and workers run."""
        return "sha256:" + hashlib.sha256(self.canonical_bytes()).hexdigest()
