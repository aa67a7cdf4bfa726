"""A pipeline spec's parsing and validation: every refusal names its field; versions hash."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.errors import RequestError
from shared.spec.ddl import TypeKind
from shared.spec.model import AggFn
from shared.spec.parse import (
    AGGREGATIONS_MAX,
    LG_CONFIG_K_DEFAULT,
    SPEC_BYTES_MAX,
    load_spec_file,
    parse_spec,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "orders.toml"

BASE = """
[schema]
ddl = "customer STRING, amount DECIMAL(12,2), price DOUBLE, currency STRING, ts TIMESTAMP"
key = "customer"
"""


def agg(name: str, fn: str, column: str | None = None, extra: str = "") -> str:
    col = "" if column is None else f'column = "{column}"\n'
    return f'\n[[aggregations]]\nname = "{name}"\nfn = "{fn}"\n{col}{extra}'


def refused(text: str) -> RequestError:
    with pytest.raises(RequestError) as info:
        parse_spec(text)
    assert info.value.code == "invalid"
    return info.value


def test_the_example_spec_parses() -> None:
    spec = load_spec_file(EXAMPLE)
    assert spec.key == "customer"
    assert [a.fn for a in spec.aggregations] == [
        AggFn.COUNT,
        AggFn.SUM,
        AggFn.APPROX_DISTINCT,
        AggFn.MEAN,
        AggFn.FIRST,
        AggFn.LAST,
    ]
    assert spec.transform is not None and spec.transform.function == "orders_only"
    assert spec.schema.column("amount") is not None
    assert spec.version.startswith("sha256:") and len(spec.version) == 7 + 64


def test_a_valid_spec_has_every_fn() -> None:
    text = BASE + "".join(
        [
            agg("n", "count"),
            agg("n_amount", "count", "amount"),
            agg("revenue", "sum", "amount"),
            agg("low", "min", "price"),
            agg("high", "max", "ts"),
            agg("mean_amount", "mean", "amount"),
            agg("first_cur", "first", "currency"),
            agg("last_price", "last", "price"),
            agg("currencies", "approx_distinct", "currency"),
            agg("currencies_k6", "approx_distinct", "currency", "lg_config_k = 6\n"),
        ]
    )
    spec = parse_spec(text)
    by_name = {a.name: a for a in spec.aggregations}
    assert by_name["n"].column is None
    assert by_name["currencies"].lg_config_k == LG_CONFIG_K_DEFAULT
    assert by_name["currencies_k6"].lg_config_k == 6
    assert by_name["revenue"].lg_config_k is None
    amount = spec.schema.column("amount")
    assert amount is not None and amount.type.kind is TypeKind.DECIMAL
    assert (amount.type.precision, amount.type.scale) == (12, 2)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("not toml [", "spec"),
        ("x = 1\n" + BASE + agg("n", "count"), "x"),
        ("format = 2\n" + BASE + agg("n", "count"), "format"),
        (agg("n", "count"), "schema"),
        ('[schema]\nkey = "a"\n' + agg("n", "count"), "schema.ddl"),
        ('[schema]\nddl = "a STRING"\n' + agg("n", "count"), "schema.key"),
        ('[schema]\nddl = "a STRING"\nkey = "b"\n' + agg("n", "count"), "schema.key"),
        ('[schema]\nddl = "a DOUBLE"\nkey = "a"\n' + agg("n", "count"), "schema.key"),
        ('[schema]\nddl = "a MAP<STRING,INT>"\nkey = "a"\n' + agg("n", "count"), "schema.ddl"),
        ('[schema]\nddl = "a STRING, A INT"\nkey = "a"\n' + agg("n", "count"), "schema.ddl"),
        (
            '[schema]\nddl = "a STRING, offset BIGINT"\nkey = "a"\n' + agg("n", "count"),
            "schema.ddl",
        ),
        (
            '[schema]\nddl = "a STRING, b DECIMAL(40,2)"\nkey="a"\n' + agg("n", "count"),
            "schema.ddl",
        ),
        ('[schema]\nddl = "a STRING"\nkey = "a"\nextra = 1\n' + agg("n", "count"), "schema.extra"),
        (BASE, "aggregations"),
        (BASE + agg("n", "median", "amount"), "aggregations[0].fn"),
        (BASE + agg("n", "count") + agg("m", "sum", "nope"), "aggregations[1].column"),
        (BASE + agg("n", "count") + agg("m", "sum", "currency"), "aggregations[1].column"),
        (BASE + agg("n", "count") + agg("m", "sum", "price"), "aggregations[1].column"),
        (BASE + agg("n", "count") + agg("m", "mean", "price"), "aggregations[1].column"),
        (BASE + agg("n", "count") + agg("m", "approx_distinct", "ts"), "aggregations[1].column"),
        (BASE + agg("n", "sum"), "aggregations[0].column"),
        (BASE + agg("n", "count") + agg("N", "count"), "aggregations[1].name"),
        (BASE + agg("customer", "count"), "aggregations[0].name"),
        (BASE + agg("bad name", "count"), "aggregations[0].name"),
        (BASE + agg("x" * 65, "count"), "aggregations[0].name"),
        (BASE + agg("n", "count", extra="lg_config_k = 8\n"), "aggregations[0].lg_config_k"),
        (
            BASE + agg("n", "approx_distinct", "currency", "lg_config_k = 22\n"),
            "aggregations[0].lg_config_k",
        ),
        (BASE + agg("n", "count", extra="window = 5\n"), "aggregations[0].window"),
        (
            BASE + "".join(agg(f"a{i}", "count") for i in range(AGGREGATIONS_MAX + 1)),
            "aggregations",
        ),
        (BASE + agg("n", "count") + "#" * SPEC_BYTES_MAX, "spec"),
    ],
)
def test_a_bad_spec_is_refused_with_its_field(text: str, field: str) -> None:
    assert refused(text).field == field


def transform_spec(body: str, function: str = "", output: str = "") -> str:
    fn = f'function = "{function}"\n' if function else ""
    out = f'output = "{output}"\n' if output else ""
    return BASE + f"\n[transform]\n{fn}{out}source = '''\n{body}\n'''\n" + agg("n", "count")


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (transform_spec("def transform(df) return df"), "transform"),
        (
            transform_spec("import no_such_module_anywhere\ndef transform(df):\n    return df"),
            "transform",
        ),
        (transform_spec("raise RuntimeError('boom')"), "transform"),
        (transform_spec("def other(df):\n    return df"), "transform"),
        (transform_spec("transform = 3"), "transform"),
        (
            transform_spec("def t(df):\n    return df", "t", "amount DECIMAL(12,2)"),
            "transform.output",
        ),
        (transform_spec("def t(df):\n    return df", "t", "customer BIGINT"), "transform.output"),
        (BASE + "[transform]\nfunction = 't'\n" + agg("n", "count"), "transform"),
        (BASE + "[transform]\nfile = 't.py'\n" + agg("n", "count"), "transform.file"),
    ],
)
def test_a_bad_transform_is_refused(text: str, field: str) -> None:
    assert refused(text).field == field


def test_the_transform_output_is_what_aggregations_read() -> None:
    body = "def t(df):\n    return df.assign(cents=1)"
    ok = transform_spec(body, "t", "customer STRING, cents BIGINT") + agg("c", "sum", "cents")
    spec = parse_spec(ok)
    assert spec.aggregated.names == ("customer", "cents")
    # The record's own columns are not readable past a transform that drops them.
    gone = transform_spec(body, "t", "customer STRING, cents BIGINT") + agg("c", "sum", "amount")
    assert refused(gone).field == "aggregations[1].column"


def test_a_transform_file_is_read_beside_the_spec_and_embedded(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("def transform(df):\n    return df\n")
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(BASE + "[transform]\nfile = 't.py'\n" + agg("n", "count"))
    spec = load_spec_file(spec_file)
    assert spec.transform is not None and "return df" in spec.transform.source
    before = spec.version
    (tmp_path / "t.py").write_text("def transform(df):\n    return df.copy()\n")
    assert load_spec_file(spec_file).version != before  # the source, not the file name
    spec_file.write_text(BASE + "[transform]\nfile = '../t.py'\n" + agg("n", "count"))
    with pytest.raises(RequestError) as info:
        load_spec_file(spec_file)
    assert info.value.field == "transform.file"


def test_the_version_ignores_layout_and_output_order_only() -> None:
    a, b = agg("n", "count"), agg("revenue", "sum", "amount")
    spec = parse_spec(BASE + a + b)
    relaid = "# a comment\n" + BASE.replace('key = "customer"', 'key   =   "customer"  # k')
    assert parse_spec(relaid + b + a).version == spec.version
    changes = [
        BASE.replace("DECIMAL(12,2)", "DECIMAL(12,3)") + a + b,
        BASE.replace('key = "customer"', 'key = "currency"') + a + b,
        BASE + a + b + agg("m", "count"),
        BASE + a + agg("rev", "sum", "amount"),
        BASE + a + agg("revenue", "mean", "amount"),
        BASE + a + b + agg("d", "approx_distinct", "currency", "lg_config_k = 11\n"),
    ]
    versions = {parse_spec(text).version for text in changes}
    assert spec.version not in versions and len(versions) == len(changes)


def test_the_version_pins_the_transform_source_byte_for_byte() -> None:
    one = parse_spec(transform_spec("def transform(df):\n    return df"))
    spaced = parse_spec(transform_spec("def transform(df):\n    return df  "))
    other_fn = parse_spec(transform_spec("def t(df):\n    return df", "t"))
    assert len({one.version, spaced.version, other_fn.version}) == 3
    assert parse_spec(transform_spec("def transform(df):\n    return df")).version == one.version


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("format = true\n" + BASE + agg("n", "count"), "format"),
        (BASE + "[transform]\n" + agg("n", "count"), "transform"),
        ('transform = "t.py"\n' + BASE + agg("n", "count"), "transform"),
        ("aggregations = [1]\n" + BASE, "aggregations[0]"),
    ],
)
def test_a_value_of_the_wrong_shape_is_refused(text: str, field: str) -> None:
    assert refused(text).field == field
