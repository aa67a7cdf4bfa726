"""A TOML pipeline spec into a validated `PipelineSpec`, or a refusal naming the field at fault.

Owns every check a spec passes at create, and every bound on its size. Invariant: `parse_spec`
returns a spec only if each aggregation is one of the mergeable set over a column of a type it
is exact for, every name resolves, the transform loads, and every bound holds; otherwise it
raises `RequestError(code="invalid", field=...)`, the field spelled as a path into the file
(`schema.key`, `transform.source`, `aggregations[2].fn`, 0-based). Needs no Spark.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from shared.errors import RequestError
from shared.spec.ddl import Column, DdlError, Schema, TypeKind, parse_ddl
from shared.spec.model import (
    FORMAT_VERSION,
    AggFn,
    AggregationSpec,
    PipelineSpec,
    TransformSpec,
    WindowSpec,
)
from shared.spec.transform import TransformError, load_transform

__all__ = [
    "AGGREGATIONS_MAX",
    "FORMAT_KEYS",
    "LG_CONFIG_K_DEFAULT",
    "LG_CONFIG_K_MAX",
    "LG_CONFIG_K_MIN",
    "OUTPUT_NAME_CHARS_MAX",
    "SPEC_BYTES_MAX",
    "TRANSFORM_FUNCTION_DEFAULT",
    "WINDOWS_PER_RECORD_MAX",
    "WINDOW_LATENESS_MAX_S",
    "WINDOW_SIZE_MAX_S",
    "load_spec_file",
    "parse_spec",
]

SPEC_BYTES_MAX = 256 * 1024  # the whole spec, an embedded transform included
AGGREGATIONS_MAX = 64
OUTPUT_NAME_CHARS_MAX = 64
TRANSFORM_FUNCTION_DEFAULT = "transform"
# Spark's hll_sketch_agg accepts 4..21; 12 (4096 buckets, about 1.6% relative error) is its
# default, said here so a Spark upgrade cannot change a spec's results.
LG_CONFIG_K_MIN, LG_CONFIG_K_MAX, LG_CONFIG_K_DEFAULT = 4, 21, 12

# A window spans at most a week and a record lands in at most this many (size / slide) sliding
# windows: each is a state row per key. Lateness is bounded alike: every open window waits it.
WINDOW_SIZE_MAX_S = 7 * 24 * 3600
WINDOWS_PER_RECORD_MAX = 100
WINDOW_LATENESS_MAX_S = 7 * 24 * 3600
WINDOW_LATENESS_DEFAULT = "0s"

_DURATION = re.compile(r"([0-9]{1,9})([smhd])\Z")
_DURATION_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_OUTPUT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TOP_KEYS = frozenset({"format", "schema", "transform", "aggregations", "window"})
_SCHEMA_KEYS = frozenset({"ddl", "key"})
_TRANSFORM_KEYS = frozenset({"source", "file", "function", "output"})
_AGG_KEYS = frozenset({"name", "fn", "column", "lg_config_k"})
_WINDOW_KEYS = frozenset({"column", "size", "slide", "lateness"})
# Every key of the format, as a refusal's field spells it (the reference lists each).
FORMAT_KEYS = (
    *sorted(_TOP_KEYS),
    *(f"schema.{k}" for k in sorted(_SCHEMA_KEYS)),
    *(f"transform.{k}" for k in sorted(_TRANSFORM_KEYS)),
    *(f"aggregations[i].{k}" for k in sorted(_AGG_KEYS)),
    *(f"window.{k}" for k in sorted(_WINDOW_KEYS)),
)
_KEY_TYPES = frozenset({TypeKind.STRING, TypeKind.INT, TypeKind.BIGINT})
# sum and mean are exact over integers and decimals only: floating-point addition is not
# associative, so a DOUBLE's sum would depend on how the input was split into batches.
_EXACT_SUM_TYPES = frozenset({TypeKind.INT, TypeKind.BIGINT, TypeKind.DECIMAL})
_SKETCH_TYPES = frozenset({TypeKind.STRING, TypeKind.INT, TypeKind.BIGINT})  # hll_sketch_agg's


def _refuse(field: str, message: str) -> NoReturn:
    raise RequestError(f"{field}: {message}", field=field, code="invalid")


def _table(doc: Mapping[str, Any], key: str, field: str, *, required: bool) -> dict[str, Any]:
    value = doc.get(key)
    if value is None:
        if required:
            _refuse(field, "is required")
        return {}
    if not isinstance(value, dict):
        _refuse(field, "must be a table")
    return value


def _string(doc: Mapping[str, Any], key: str, field: str, *, required: bool) -> str | None:
    value = doc.get(key)
    if value is None:
        if required:
            _refuse(field, "is required")
        return None
    if not isinstance(value, str):
        _refuse(field, f"must be a string, not {type(value).__name__}")
    return value


def _no_unknown_keys(doc: Mapping[str, Any], known: frozenset[str], prefix: str) -> None:
    for key in doc:
        if key not in known:
            _refuse(f"{prefix}{key}", f"is not a key of this format (known: {sorted(known)})")


def _schema(ddl: str, field: str) -> Schema:
    try:
        schema = parse_ddl(ddl)
    except DdlError as exc:
        _refuse(field, str(exc))
    if not schema.columns:
        _refuse(field, "declares no column")
    return schema


def parse_spec(text: str, *, base_dir: Path | None = None) -> PipelineSpec:
    """Parse and validate a spec; `base_dir` resolves `transform.file` (read and embedded)."""
    if len(text.encode()) > SPEC_BYTES_MAX:
        _refuse("spec", f"is over {SPEC_BYTES_MAX} bytes")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        _refuse("spec", f"is not TOML: {exc}")
    _no_unknown_keys(doc, _TOP_KEYS, "")
    fmt = doc.get("format", FORMAT_VERSION)
    if type(fmt) is not int or fmt != FORMAT_VERSION:  # `true == 1` in Python: not a format
        _refuse("format", f"{fmt!r} is not a format this release reads ({FORMAT_VERSION})")

    schema_doc = _table(doc, "schema", "schema", required=True)
    _no_unknown_keys(schema_doc, _SCHEMA_KEYS, "schema.")
    schema = _schema(str(_string(schema_doc, "ddl", "schema.ddl", required=True)), "schema.ddl")
    key = str(_string(schema_doc, "key", "schema.key", required=True))
    key_column = schema.column(key)
    if key_column is None:
        _refuse("schema.key", f"{key!r} is not a column of schema.ddl ({', '.join(schema.names)})")
    if key_column.type.kind not in _KEY_TYPES:
        _refuse("schema.key", f"a key is a STRING, INT or BIGINT, not {key_column.type.ddl}")

    transform = _transform(doc, schema, key_column, base_dir)
    aggregated = transform.output if transform is not None else schema
    aggregations = _aggregations(doc, aggregated, key)
    window = _window(doc, aggregated)
    return PipelineSpec(
        schema=schema, key=key, transform=transform, aggregations=aggregations, window=window
    )


def load_spec_file(path: Path) -> PipelineSpec:
    """A spec file, its `transform.file` read from beside it."""
    data = path.read_bytes()
    if len(data) > SPEC_BYTES_MAX:
        _refuse("spec", f"is over {SPEC_BYTES_MAX} bytes")
    return parse_spec(data.decode(), base_dir=path.parent)


def _transform(
    doc: Mapping[str, Any], schema: Schema, key_column: Column, base_dir: Path | None
) -> TransformSpec | None:
    if "transform" not in doc:
        return None
    t = _table(doc, "transform", "transform", required=True)
    _no_unknown_keys(t, _TRANSFORM_KEYS, "transform.")
    source = _string(t, "source", "transform.source", required=False)
    file = _string(t, "file", "transform.file", required=False)
    if (source is None) == (file is None):
        _refuse("transform", "give exactly one of transform.source and transform.file")
    if file is not None:
        source = _read_transform_file(file, base_dir)
    assert source is not None
    if len(source.encode()) > SPEC_BYTES_MAX:
        _refuse("transform.source", f"is over {SPEC_BYTES_MAX} bytes")
    function = _string(t, "function", "transform.function", required=False)
    function = function or TRANSFORM_FUNCTION_DEFAULT
    try:
        load_transform(source, function)
    except TransformError as exc:
        _refuse("transform", str(exc))
    output_ddl = _string(t, "output", "transform.output", required=False)
    output = schema if output_ddl is None else _schema(output_ddl, "transform.output")
    # Rows are routed by the key as produced: the transform passes it through unchanged.
    kept = output.column(key_column.name)
    if kept is None or kept.type != key_column.type:
        _refuse(
            "transform.output",
            f"must keep the key column {key_column.name!r} as {key_column.type.ddl}",
        )
    return TransformSpec(source=source, function=function, output=output)


def _read_transform_file(file: str, base_dir: Path | None) -> str:
    if base_dir is None:
        _refuse("transform.file", "a spec given as text must embed its transform.source")
    path = Path(file)
    if path.is_absolute() or ".." in path.parts:
        _refuse("transform.file", "must be a path relative to the spec's directory, inside it")
    try:
        data = (base_dir / path).read_bytes()
    except OSError as exc:
        _refuse("transform.file", f"cannot be read: {exc.strerror}")
    if len(data) > SPEC_BYTES_MAX:
        _refuse("transform.file", f"is over {SPEC_BYTES_MAX} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError:
        _refuse("transform.file", "is not UTF-8")


def _aggregations(doc: Mapping[str, Any], schema: Schema, key: str) -> tuple[AggregationSpec, ...]:
    items = doc.get("aggregations")
    if not isinstance(items, list) or not items:
        _refuse("aggregations", "is required: at least one [[aggregations]] table")
    if len(items) > AGGREGATIONS_MAX:
        _refuse("aggregations", f"at most {AGGREGATIONS_MAX}, got {len(items)}")
    out: list[AggregationSpec] = []
    names: set[str] = set()
    for i, item in enumerate(items):
        prefix = f"aggregations[{i}]"
        if not isinstance(item, dict):
            _refuse(prefix, "must be a table")
        agg = _aggregation(item, prefix, schema, key)
        if agg.name.lower() in names:
            _refuse(f"{prefix}.name", f"{agg.name!r} is already an output of this spec")
        names.add(agg.name.lower())
        out.append(agg)
    return tuple(out)


def _aggregation(item: Mapping[str, Any], prefix: str, schema: Schema, key: str) -> AggregationSpec:
    _no_unknown_keys(item, _AGG_KEYS, f"{prefix}.")
    name = str(_string(item, "name", f"{prefix}.name", required=True))
    if not _OUTPUT_NAME.match(name) or len(name) > OUTPUT_NAME_CHARS_MAX:
        _refuse(
            f"{prefix}.name",
            f"{name!r} must be an identifier of at most {OUTPUT_NAME_CHARS_MAX} characters",
        )
    if name == key:
        _refuse(f"{prefix}.name", f"{name!r} is the key column's name")
    fn_text = str(_string(item, "fn", f"{prefix}.fn", required=True))
    try:
        fn = AggFn(fn_text)
    except ValueError:
        _refuse(
            f"{prefix}.fn",
            f"{fn_text!r} is not a mergeable aggregation (one of {[f.value for f in AggFn]})",
        )
    column_name = _string(item, "column", f"{prefix}.column", required=fn is not AggFn.COUNT)
    column = None
    if column_name is not None:
        column = schema.column(column_name)
        if column is None:
            _refuse(f"{prefix}.column", f"{column_name!r} is not a column ({schema.ddl})")
    lg_config_k = item.get("lg_config_k")
    if fn is AggFn.APPROX_DISTINCT:
        lg_config_k = LG_CONFIG_K_DEFAULT if lg_config_k is None else lg_config_k
        if type(lg_config_k) is not int or not LG_CONFIG_K_MIN <= lg_config_k <= LG_CONFIG_K_MAX:
            _refuse(
                f"{prefix}.lg_config_k",
                f"must be an integer in [{LG_CONFIG_K_MIN}, {LG_CONFIG_K_MAX}]",
            )
    elif lg_config_k is not None:
        _refuse(f"{prefix}.lg_config_k", "belongs to approx_distinct only")
    if column is not None:
        _check_type(fn, column, prefix)
    return AggregationSpec(name=name, fn=fn, column=column_name, lg_config_k=lg_config_k)


def _check_type(fn: AggFn, column: Column, prefix: str) -> None:
    kind = column.type.kind
    if fn in (AggFn.SUM, AggFn.MEAN) and kind not in _EXACT_SUM_TYPES:
        why = (
            "floating-point addition is not associative, so the result would depend on how "
            "the input is split into batches: declare it DECIMAL(p,s)"
            if kind is TypeKind.DOUBLE
            else "it is not a number"
        )
        _refuse(f"{prefix}.column", f"{fn.value} of {column.name} ({column.type.ddl}): {why}")
    if fn is AggFn.APPROX_DISTINCT and kind not in _SKETCH_TYPES:
        _refuse(
            f"{prefix}.column",
            f"approx_distinct sketches STRING, INT or BIGINT, not {column.type.ddl}",
        )


def _duration_s(text: str | None, field: str) -> int | None:
    """A duration as "90s", "5m", "1h" or "1d", in seconds; None when not given."""
    if text is None:
        return None
    match = _DURATION.match(text.strip())
    if match is None:
        _refuse(field, f'{text!r} is not a duration (a whole number and s, m, h or d: "5m")')
    return int(match.group(1)) * _DURATION_UNIT_S[match.group(2)]


def _window(doc: Mapping[str, Any], schema: Schema) -> WindowSpec | None:
    if "window" not in doc:
        return None
    w = _table(doc, "window", "window", required=True)
    _no_unknown_keys(w, _WINDOW_KEYS, "window.")
    name = str(_string(w, "column", "window.column", required=True))
    column = schema.column(name)
    if column is None:
        _refuse("window.column", f"{name!r} is not a column ({schema.ddl})")
    if column.type.kind is not TypeKind.TIMESTAMP:
        _refuse("window.column", f"windows are over a TIMESTAMP column, not {column.type.ddl}")
    size = _duration_s(_string(w, "size", "window.size", required=True), "window.size")
    assert size is not None
    if not 0 < size <= WINDOW_SIZE_MAX_S:
        _refuse("window.size", f"must be positive and at most {WINDOW_SIZE_MAX_S} s")
    slide = _duration_s(_string(w, "slide", "window.slide", required=False), "window.slide")
    slide = size if slide is None else slide
    if slide <= 0 or size % slide:
        _refuse("window.slide", f"must be positive and divide window.size ({size} s)")
    if size // slide > WINDOWS_PER_RECORD_MAX:
        _refuse(
            "window.slide",
            f"size / slide is {size // slide}: a record would be in more than "
            f"{WINDOWS_PER_RECORD_MAX} windows",
        )
    lateness_text = _string(w, "lateness", "window.lateness", required=False)
    lateness = _duration_s(lateness_text or WINDOW_LATENESS_DEFAULT, "window.lateness")
    assert lateness is not None
    if lateness > WINDOW_LATENESS_MAX_S:
        _refuse("window.lateness", f"must be at most {WINDOW_LATENESS_MAX_S} s")
    return WindowSpec(column=name, size_s=size, slide_s=slide, lateness_s=lateness)
