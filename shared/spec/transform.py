"""A spec's row transform: Python source shipped inside the spec, loaded from that text.

Owns turning the source into a callable. Invariant: the function run is the one compiled from
the spec's own source, in a fresh module namespace named after the source's hash, never one
found by importing whatever the process has installed; a source that does not compile, raises
while it loads, or lacks the named function is a `TransformError` before anything runs.

The contract for the function (docs/reference/pipeline-spec.md, "The transform"): it takes a
`pandas.DataFrame` of record columns plus `offset` and returns one of its output columns plus
`offset`. It runs on Spark over batches of rows (`mapInPandas`), so it must be a pure function
of each row: no clock, randomness, files, network or state kept between calls; it may drop a
row, rewrite a value, add a column, or emit several rows carrying their source row's offset;
it must not rewrite the key (rows are routed by the key as produced).
"""

from __future__ import annotations

import hashlib
import types
from collections.abc import Callable
from typing import Any

__all__ = ["TransformError", "TransformFn", "load_transform"]

TransformFn = Callable[[Any], Any]  # pandas.DataFrame -> pandas.DataFrame


class TransformError(ValueError):
    """The transform's source cannot give the function the spec names."""


def load_transform(source: str, function: str) -> TransformFn:
    """Compile `source` in its own module and return its `function`."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    module_name = f"ripple_spec_transform_{digest}"
    try:
        code = compile(source, f"<transform {digest}>", "exec")
    except SyntaxError as exc:
        raise TransformError(f"does not compile: {exc.msg} (line {exc.lineno})") from exc
    # A module that is never put in sys.modules: nothing else can import it, and cloudpickle
    # ships its functions to Spark's Python workers by value, source included.
    module = types.ModuleType(module_name)
    try:
        exec(code, module.__dict__)
    except Exception as exc:  # the owner's code: any failure to load is theirs to fix
        raise TransformError(f"does not import: {type(exc).__name__}: {exc}") from exc
    fn = module.__dict__.get(function)
    if fn is None:
        raise TransformError(f"defines no {function!r}")
    if not callable(fn):
        raise TransformError(f"{function!r} is not a function")
    loaded: TransformFn = fn
    return loaded
