"""A spec's transform is run from the spec's own source, never from an import, and its output
is cut to the columns the spec declares (the Spark route is tested on Spark, in
tests/integration/test_pipeline_spec_spark.py)."""

from __future__ import annotations

import pickle
import sys

import pandas as pd
import pytest
from pyspark import cloudpickle

from pipeline.spec.frames import pandas_runner
from shared.spec.transform import TransformError, load_transform

SOURCE = "import json\n\ndef transform(df):\n    return df.assign(tag=json.dumps('x'))\n"


def test_the_function_comes_from_the_source_in_a_module_nobody_can_import() -> None:
    fn = load_transform(SOURCE, "transform")
    assert fn.__module__.startswith("ripple_spec_transform_")
    assert fn.__module__ not in sys.modules
    with pytest.raises(pickle.PicklingError):
        pickle.dumps(fn)  # by reference it would need that module: there is none
    shipped = pickle.loads(cloudpickle.dumps(fn))  # by value, as Spark ships it
    out = shipped(pd.DataFrame({"a": [1]}))
    assert list(out["tag"]) == ['"x"']


def test_two_sources_with_one_function_name_stay_apart() -> None:
    one = load_transform("def transform(df):\n    return 1\n", "transform")
    two = load_transform("def transform(df):\n    return 2\n", "transform")
    assert (one(None), two(None)) == (1, 2)
    assert one.__module__ != two.__module__


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("def transform(df) return df", "does not compile"),
        ("import no_such_module_anywhere", "does not import: ModuleNotFoundError"),
        ("1 / 0", "does not import: ZeroDivisionError"),
        ("x = 1", "defines no 'transform'"),
        ("transform = 1", "'transform' is not a function"),
    ],
)
def test_a_source_that_cannot_give_the_function_is_refused(source: str, says: str) -> None:
    with pytest.raises(TransformError, match=says):
        load_transform(source, "transform")


def test_the_output_is_cut_to_the_declared_columns_and_a_missing_one_is_named() -> None:
    fn = load_transform("def t(df):\n    return df.assign(extra=1, b=df['a'] * 2)\n", "t")
    run = pandas_runner(fn, ["b", "a", "offset"])
    [out] = list(run(iter([pd.DataFrame({"a": [1, 2], "offset": [7, 8]})])))
    assert list(out.columns) == ["b", "a", "offset"]
    assert out.to_dict("list") == {"b": [2, 4], "a": [1, 2], "offset": [7, 8]}
    lacking = pandas_runner(fn, ["a", "c", "offset"])
    with pytest.raises(ValueError, match=r"lacks the columns \['c'\]"):
        list(lacking(iter([pd.DataFrame({"a": [1], "offset": [0]})])))
