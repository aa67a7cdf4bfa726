"""The record schema's Spark DDL, parsed without Spark: create-time checks must not need it.

Owns the types a spec may declare. Invariant: `parse_ddl` accepts exactly the columns whose
types are listed in `TypeKind`, each named once (case-insensitively, as Spark resolves names),
and renders back (`Schema.ddl`) to DDL that Spark parses to the same schema.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

__all__ = ["Column", "ColumnType", "DdlError", "Schema", "TypeKind", "parse_ddl"]

COLUMNS_MAX = 256
COLUMN_NAME_CHARS_MAX = 64
DECIMAL_PRECISION_MAX = 38  # Spark's
# The source log's own column: every row carries its offset, so no record may declare it.
OFFSET_COLUMN = "offset"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DECIMAL = re.compile(r"DECIMAL\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)\Z", re.I)


class DdlError(ValueError):
    """The DDL is not one this format supports; `column` names the column at fault, if any."""

    def __init__(self, message: str, column: str | None = None) -> None:
        super().__init__(message)
        self.column = column


class TypeKind(enum.Enum):
    STRING = "STRING"
    BOOLEAN = "BOOLEAN"
    INT = "INT"
    BIGINT = "BIGINT"
    DOUBLE = "DOUBLE"
    DECIMAL = "DECIMAL"
    DATE = "DATE"
    TIMESTAMP = "TIMESTAMP"


# Spark's other spellings of the same types.
_ALIASES = {"INTEGER": TypeKind.INT, "LONG": TypeKind.BIGINT}


@dataclass(frozen=True, slots=True, kw_only=True)
class ColumnType:
    kind: TypeKind
    precision: int = 0  # DECIMAL only
    scale: int = 0  # DECIMAL only

    @property
    def ddl(self) -> str:
        if self.kind is TypeKind.DECIMAL:
            return f"DECIMAL({self.precision},{self.scale})"
        return str(self.kind.value)

    @property
    def numeric(self) -> bool:
        return self.kind in (TypeKind.INT, TypeKind.BIGINT, TypeKind.DOUBLE, TypeKind.DECIMAL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    name: str
    type: ColumnType


@dataclass(frozen=True, slots=True, kw_only=True)
class Schema:
    columns: tuple[Column, ...]

    @property
    def ddl(self) -> str:
        return ", ".join(f"{c.name} {c.type.ddl}" for c in self.columns)

    def column(self, name: str) -> Column | None:
        """The column called `name` exactly (specs spell a column as their schema does)."""
        for c in self.columns:
            if c.name == name:
                return c
        return None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def parse_type(text: str, column: str) -> ColumnType:
    word = text.strip().upper()
    m = _DECIMAL.match(word)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        if not 1 <= precision <= DECIMAL_PRECISION_MAX or scale > precision:
            raise DdlError(
                f"column {column!r}: DECIMAL({precision},{scale}) is out of range "
                f"(1 <= precision <= {DECIMAL_PRECISION_MAX}, scale <= precision)",
                column,
            )
        return ColumnType(kind=TypeKind.DECIMAL, precision=precision, scale=scale)
    kind = _ALIASES.get(word)
    if kind is None:
        try:
            kind = TypeKind(word)
        except ValueError:
            supported = ", ".join(k.value for k in TypeKind if k is not TypeKind.DECIMAL)
            raise DdlError(
                f"column {column!r}: type {text.strip()!r} is not supported "
                f"(supported: {supported}, DECIMAL(p,s))",
                column,
            ) from None
    if kind is TypeKind.DECIMAL:  # a bare DECIMAL: Spark's default precision
        return ColumnType(kind=kind, precision=10, scale=0)
    return ColumnType(kind=kind)


def _split_columns(ddl: str) -> list[str]:
    """Split on the commas outside parentheses (DECIMAL(10,2) holds one)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(ddl):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise DdlError("unbalanced ')'")
        elif ch == "," and depth == 0:
            parts.append(ddl[start:i])
            start = i + 1
    if depth != 0:
        raise DdlError("unbalanced '('")
    parts.append(ddl[start:])
    return parts


def parse_ddl(ddl: str) -> Schema:
    """`name TYPE, name TYPE, ...` into a Schema; anything else is a DdlError."""
    columns: list[Column] = []
    seen: set[str] = set()
    for part in _split_columns(ddl):
        fields = part.strip().split(None, 1)
        if len(fields) != 2:
            raise DdlError(f"expected 'name TYPE', got {part.strip()!r}")
        name, type_text = fields
        if not _NAME.match(name) or len(name) > COLUMN_NAME_CHARS_MAX:
            raise DdlError(
                f"column name {name!r} must be a plain identifier of at most "
                f"{COLUMN_NAME_CHARS_MAX} characters (letters, digits, _)",
                name,
            )
        if name.lower() == OFFSET_COLUMN:
            raise DdlError(f"column {name!r}: every row already carries its offset", name)
        if name.lower() in seen:
            raise DdlError(f"column {name!r} is declared twice", name)
        seen.add(name.lower())
        columns.append(Column(name=name, type=parse_type(type_text, name)))
        if len(columns) > COLUMNS_MAX:
            raise DdlError(f"more than {COLUMNS_MAX} columns")
    return Schema(columns=tuple(columns))
