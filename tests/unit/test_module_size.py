"""No product module over 500 lines: a module that long is doing two jobs (STYLE.md rule 12).

The exceptions are the vocabularies that are one list of definitions each and the one class
whose overrides must live together; each is named with why. The dashboard's ES modules count
as product modules too.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("shared", "coordinator", "replication", "pipeline", "ripple")
LINES_MAX = 500
EXCEPTIONS: dict[str, str] = {
    "coordinator/core/commands.py": "every replicated command and result type, one list",
    "coordinator/service/models.py": "every HTTP request and answer model, one list",
    "replication/raft_node.py": "pysyncobj's overrides, which must live on one class",
}


def product_modules() -> list[Path]:
    return sorted(
        path
        for package in PRODUCT
        for pattern in ("*.py", "*.js")
        for path in (ROOT / package).rglob(pattern)
    )


def lines_of(path: Path) -> int:
    return path.read_text(encoding="utf-8").count("\n")


def test_no_product_module_is_over_the_limit() -> None:
    long = {
        str(path.relative_to(ROOT)): lines_of(path)
        for path in product_modules()
        if lines_of(path) > LINES_MAX and str(path.relative_to(ROOT)) not in EXCEPTIONS
    }
    assert not long, f"over {LINES_MAX} lines (split by job): {long}"


def test_every_exception_is_a_real_module() -> None:
    # A stale exception would let its path grow back unnoticed once the file returns.
    missing = [name for name in EXCEPTIONS if not (ROOT / name).is_file()]
    assert not missing, missing
    assert len(product_modules()) > 100  # the walk found the tree, not an empty directory
