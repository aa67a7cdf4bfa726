"""Product code reads time only through a `shared.clock.Clock`, but for the named exceptions.

A lint rule over every product module (shared, coordinator, replication, pipeline, ripple),
read with `ast` so that comments and strings never count: a time reading is a call (or a
reference, as in `default_factory=time.monotonic`) of the `time` module's clocks, an
event loop's `.time()`, `datetime.now()` and its kin, a `from time import monotonic`, or an
import of another library's clock (`pysyncobj.monotonic`).
Each one outside `ALLOW` fails the test with its file and line. `ALLOW` holds the deliberate
exceptions, each with the reason; a stale entry (a file that no longer reads the time) fails
too, so the list stays as short as the code allows.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("shared", "coordinator", "replication", "pipeline", "ripple")

# The `time` module's readings (each a clock; `sleep` and the converters are not).
TIME_READINGS = frozenset(
    {
        "monotonic",
        "monotonic_ns",
        "time",
        "time_ns",
        "perf_counter",
        "perf_counter_ns",
        "process_time",
        "process_time_ns",
        "thread_time",
        "thread_time_ns",
    }
)
# `datetime.datetime.now()`, `datetime.date.today()` and the like.
DATETIME_READINGS = frozenset({"now", "utcnow", "today"})
# Modules that are a clock: importing one is reading the time.
CLOCK_MODULES = frozenset({"pysyncobj.monotonic"})

ALLOW: dict[str, str] = {
    "shared/system_clock.py": "the real clock: the one place a process reads the time",
    "replication/durable_journal.py": (
        "times each fsync for the sync-latency histogram, whose buckets start at 0.1 ms, "
        "below the clock's millisecond; it decides nothing"
    ),
    "replication/raft_node.py": (
        "sets pysyncobj's own deadlines (election, next AppendEntries) and reads its answer "
        "times, all on the clock pysyncobj reads itself"
    ),
}


@dataclass(frozen=True, slots=True)
class Reading:
    path: str
    line: int
    code: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.code}"


def _dotted(node: ast.expr) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"]; None for anything but names and attributes."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


class _Finder(ast.NodeVisitor):
    def __init__(self) -> None:
        self.lines: list[int] = []
        self.time_modules = {"time"}  # names the `time` module is bound to here

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "time" and alias.asname:
                self.time_modules.add(alias.asname)
            if alias.name in CLOCK_MODULES:
                self.lines.append(node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "time" and any(a.name in TIME_READINGS for a in node.names):
            self.lines.append(node.lineno)
        names = {f"{node.module}.{a.name}" for a in node.names}
        if node.module in CLOCK_MODULES or names & CLOCK_MODULES:
            self.lines.append(node.lineno)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        # A `time` clock called or passed on (a default factory, a callable argument).
        if (
            node.attr in TIME_READINGS
            and isinstance(node.value, ast.Name)
            and node.value.id in self.time_modules
        ):
            self.lines.append(node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and not node.args and not node.keywords:
            receiver = func.value
            is_time_module = isinstance(receiver, ast.Name) and receiver.id in self.time_modules
            if func.attr == "time" and not is_time_module:
                self.lines.append(node.lineno)  # an event loop's clock: `loop.time()`
            dotted = _dotted(receiver)
            if (
                func.attr in DATETIME_READINGS
                and dotted is not None
                and dotted[-1] in {"datetime", "date"}
            ):
                self.lines.append(node.lineno)
        self.generic_visit(node)


def readings_in(source: str, path: str = "<source>") -> list[Reading]:
    """Every time reading in one module's source, in line order."""
    finder = _Finder()
    finder.visit(ast.parse(source, filename=path))
    text = source.splitlines()
    return [Reading(path, n, text[n - 1].strip()) for n in sorted(set(finder.lines))]


def product_readings() -> list[Reading]:
    found: list[Reading] = []
    for package in PRODUCT_PACKAGES:
        for file in sorted((REPO / package).rglob("*.py")):
            rel = file.relative_to(REPO).as_posix()
            found += readings_in(file.read_text(encoding="utf-8"), rel)
    return found


def test_product_code_reads_time_only_through_a_clock() -> None:
    stray = [r for r in product_readings() if r.path not in ALLOW]
    assert not stray, (
        "time read outside shared.clock.Clock (take a `clock: Clock` and call "
        "clock.monotonic_ms() / wall_ms(), or add the file to ALLOW with the reason):\n"
        + "\n".join(map(str, stray))
    )


def test_every_allowed_file_still_reads_the_time() -> None:
    reading = {r.path for r in product_readings()}
    stale = sorted(path for path in ALLOW if path not in reading)
    assert not stale, f"no time reading left in {stale}: drop them from ALLOW"
    assert all(reason.strip() for reason in ALLOW.values())


# Each line that reads the time ends with "# R"; nothing else is a reading.
PLANTED = """\
import asyncio
import time
import time as clock_module
from time import perf_counter  # R
from datetime import datetime
from pysyncobj.monotonic import monotonic  # R
from pysyncobj import monotonic as pysyncobj_clock  # R

# time.monotonic() in a comment is no reading
DOC = "nor is time.time() in a string, or loop.time()"


async def f(loop):
    a = time.monotonic()  # R
    b = loop.time()  # R
    c = asyncio.get_running_loop().time()  # R
    d = clock_module.monotonic_ns()  # R
    e = datetime.now()  # R
    g = time.time()  # R
    h = time.perf_counter_ns()  # R
    time.sleep(0)
    await asyncio.sleep(0)
    return time.gmtime(0), time.strftime("%Y"), a, b, c, d, e, g, h


FACTORY = dict(default_factory=time.monotonic)  # R
"""


def test_the_rule_finds_planted_readings_and_nothing_else() -> None:
    marked = [n for n, line in enumerate(PLANTED.splitlines(), 1) if line.endswith("# R")]
    found = readings_in(PLANTED)
    assert [r.line for r in found] == marked
    assert str(found[3]) == "<source>:14: a = time.monotonic()  # R"


def test_a_file_of_no_readings_has_none() -> None:
    assert readings_in("import time\n\ntime.sleep(1)\nx = time.gmtime(0)\n") == []
