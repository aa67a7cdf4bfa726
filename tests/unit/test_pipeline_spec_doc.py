"""The spec format's reference (docs/reference/pipeline-spec.md) says what the code does: every
key, every aggregation and type, every bound with its value, and an example that parses."""

from __future__ import annotations

import re
from pathlib import Path

from shared.spec import ddl
from shared.spec.model import FORMAT_VERSION, AggFn
from shared.spec.parse import (
    AGGREGATIONS_MAX,
    FORMAT_KEYS,
    LG_CONFIG_K_DEFAULT,
    LG_CONFIG_K_MAX,
    LG_CONFIG_K_MIN,
    OUTPUT_NAME_CHARS_MAX,
    SPEC_BYTES_MAX,
    TRANSFORM_FUNCTION_DEFAULT,
    parse_spec,
)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "pipeline-spec.md"
TEXT = PAGE.read_text(encoding="utf-8")


def test_every_key_has_a_row() -> None:
    for key in FORMAT_KEYS:
        assert f"| `{key}` |" in TEXT, key


def test_every_aggregation_has_a_row() -> None:
    for fn in AggFn:
        assert f"| `{fn.value}` |" in TEXT, fn


def test_every_type_is_listed() -> None:
    types = TEXT.split("## Column types", 1)[1].split("##", 1)[0]
    for kind in ddl.TypeKind:
        assert f"`{kind.value}" in types, kind
    bare = ddl.parse_ddl("a DECIMAL").columns[0].type
    assert f"bare `DECIMAL` is `{bare.ddl}`" in types


def test_every_bound_is_stated_with_its_value() -> None:
    assert f"at most {AGGREGATIONS_MAX}" in TEXT
    assert f"At most {ddl.COLUMNS_MAX} columns" in TEXT
    assert f"at most {ddl.COLUMN_NAME_CHARS_MAX} characters" in TEXT
    assert f"at most {OUTPUT_NAME_CHARS_MAX} characters" in TEXT
    assert f"at most {SPEC_BYTES_MAX // 1024} KiB" in TEXT
    assert f"{LG_CONFIG_K_MIN} to {LG_CONFIG_K_MAX}" in TEXT
    assert f"| `{LG_CONFIG_K_DEFAULT}` |" in TEXT
    assert f"| `{FORMAT_VERSION}` |" in TEXT
    assert f'| `"{TRANSFORM_FUNCTION_DEFAULT}"` |' in TEXT
    assert f"p <= {ddl.DECIMAL_PRECISION_MAX}" in TEXT


def test_the_example_on_the_page_parses() -> None:
    blocks = re.findall(r"```toml\n(.*?)```", TEXT, re.S)
    assert len(blocks) == 1
    spec = parse_spec(blocks[0])
    assert [a.fn for a in spec.aggregations] == [AggFn.COUNT, AggFn.APPROX_DISTINCT]
