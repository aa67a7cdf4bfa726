"""The dashboard's files: they ship in a regular (non-editable) install, the state names the
page uses are the core's, and no module of the page holds a copy of one.

An editable install reads the files from the source tree, so only a build shows whether
setup.cfg's package_data carries them: setuptools' own build_py copies the packages into a
temporary directory, and every file the server loads must be there. The page names states
only through /ui/enums.json (`dashboard_enums.py`): the served document is compared with the
core's Enum classes, and every module is scanned for a state name written as a literal.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from enum import Enum
from pathlib import Path

from coordinator.core import liveness, model
from coordinator.core.model import ChangeReason, MigrationPhase, RescalePhase
from coordinator.service.dashboard import UI_FILES, load_assets
from coordinator.service.dashboard_enums import ENUMS_FILE

ROOT = Path(__file__).resolve().parents[2]
UI = ROOT / "coordinator" / "service" / "ui"
# The core's enums whose values the page compares with or shows, named here on their own so
# a change to the served list is a change this test sees.
SHOWN = {"PartitionStatus", "WorkerState", "Liveness", "MigrationPhase", "RescalePhase"}
SHOWN |= {"ChangeReason", "PipelineState"}


def core_enum(name: str) -> type[Enum]:
    """The core's Enum class of that name (the modules that declare the shown ones)."""
    (cls,) = {getattr(m, name) for m in (model, liveness) if hasattr(m, name)}
    assert isinstance(cls, type) and issubclass(cls, Enum), name
    return cls


MODULE_LINES_MAX = 500
BUILD_TIMEOUT_S = 120.0


def test_a_build_carries_every_dashboard_file(tmp_path: Path) -> None:
    out = tmp_path / "lib"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from setuptools import setup; setup()",
            "-q",
            "build_py",
            "--build-lib",
            str(out),
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=BUILD_TIMEOUT_S,
    )
    ui = out / "coordinator" / "service" / "ui"
    shipped = {p.name for p in ui.iterdir()} if ui.is_dir() else set()
    assert set(UI_FILES) <= shipped, f"missing from a build: {set(UI_FILES) - shipped}"
    source = {p.name for p in (ROOT / "coordinator" / "service" / "ui").iterdir()}
    assert source <= set(UI_FILES), f"files the server does not serve: {source - set(UI_FILES)}"


def test_the_server_loads_each_file_with_its_type() -> None:
    assets = load_assets()
    assert set(assets) == set(UI_FILES) | {ENUMS_FILE}
    for name, asset in assets.items():
        assert asset.body, name
        assert asset.content_type == UI_FILES.get(name, "application/json")


def served_enums() -> dict[str, object]:
    doc = json.loads(load_assets()[ENUMS_FILE].body)
    assert isinstance(doc, dict)
    return doc


def test_the_served_enums_are_the_cores() -> None:
    doc = served_enums()
    enums = doc["enums"]
    assert isinstance(enums, dict) and set(enums) == SHOWN
    for name, members in enums.items():
        assert members == {m.name: m.value for m in core_enum(name)}, name
    # Declared order is the order the page draws steps in: JSON keeps it.
    assert list(doc["enums"]["RescalePhase"].values()) == [m.value for m in RescalePhase]
    assert doc["migration_finished"] == [MigrationPhase.DONE.value, MigrationPhase.ABORTED.value]
    reasons = doc["reason_text"]
    assert set(reasons) == {r.value for r in ChangeReason}
    assert all(isinstance(t, str) and t for t in reasons.values())


# Comments first, then string literals (quotes or backticks with no ${...}) and object keys.
_COMMENT = re.compile(r"/\*.*?\*/|(?<![:\\])//[^\n]*", re.S)
_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"|\'((?:[^\'\\\n]|\\.)*)\'|`([^`$]*)`')
_KEY = re.compile(r"[{,]\s*([A-Za-z_$][\w$]*)\s*:")
# An element id ($("rescale")) names a place in index.html, not a state.
_ELEMENT = re.compile(r'\$\("[\w-]+"\)')


def words_of(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string literal and object key of a module."""
    code = _ELEMENT.sub("$()", _COMMENT.sub(lambda m: "\n" * m.group().count("\n"), source))
    found = []
    for m in _LITERAL.finditer(code):
        text = next(g for g in m.groups() if g is not None)
        found.append((code.count("\n", 0, m.start()) + 1, text))
    for m in _KEY.finditer(code):
        found.append((code.count("\n", 0, m.start()) + 1, m.group(1)))
    return found


def test_the_scan_sees_a_copied_state_name() -> None:
    words = {w for _, w in words_of('x({ online: 1 }, "done", \'aborted\', `cutting`); // "left"')}
    assert {"online", "done", "aborted", "cutting"} <= words and "left" not in words


def test_no_module_copies_a_state_name() -> None:
    values = {m.value for name in SHOWN for m in core_enum(name)}
    modules = sorted(UI.glob("*.js"))
    assert modules, "no module found"
    copies = [
        f"{path.name}:{line}: {text!r}"
        for path in modules
        for line, text in words_of(path.read_text())
        if text in values
    ]
    assert not copies, "state names belong to /ui/enums.json: " + ", ".join(copies)


def test_every_module_is_small_and_served() -> None:
    for path in UI.glob("*.js"):
        lines = path.read_text().count("\n")
        assert lines <= MODULE_LINES_MAX, f"{path.name}: {lines} lines"
        assert UI_FILES.get(path.name) == "text/javascript", path.name


# How the modules name members: `E.Enum.NAME`, `const { NAME, ... } = E.Enum;`, and the
# tables keyed by name that `kinds(E.Enum, TABLE)` resolves.
_MEMBER = re.compile(r"\bE\.(\w+)\.([A-Z][A-Z0-9_]*)\b")
_DESTRUCTURED = re.compile(r"const \{([^}]*)\} = (?:app\.enums\.)?E\.(\w+);")
_KINDS_CALL = re.compile(r"\bkinds\((?:app\.enums\.)?E\.(\w+), ([A-Z_]+)\)")
_ENUM = re.compile(r"\bE\.(\w+)")


def members_named(source: str) -> set[tuple[str, str]]:
    """(enum, member name) of every member a module names."""
    named = set(_MEMBER.findall(source))
    for names, enum in _DESTRUCTURED.findall(source):
        named |= {(enum, n.strip()) for n in names.split(",") if n.strip()}
    for enum, table in _KINDS_CALL.findall(source):
        body = re.search(rf"const {table} = \{{(.*?)\}};", source, re.S)
        assert body is not None, f"table {table} not found"
        named |= {(enum, key) for key in re.findall(r"([A-Z][A-Z0-9_]*)\s*:", body.group(1))}
    return named


def test_the_scan_sees_a_member_name() -> None:
    source = (
        "const T = {\n  ONLINE: 1, GONE: 2,\n};\nkinds(E.PartitionStatus, T); E.WorkerState.LEFT;"
    )
    assert members_named(source + "const { A, B } = app.enums.E.Liveness;") == {
        ("PartitionStatus", "ONLINE"),
        ("PartitionStatus", "GONE"),
        ("WorkerState", "LEFT"),
        ("Liveness", "A"),
        ("Liveness", "B"),
    }


def test_every_member_a_module_names_is_the_cores() -> None:
    """A member renamed or removed in the core fails here, not in a browser."""
    named: set[tuple[str, str]] = set()
    for path in UI.glob("*.js"):
        source = path.read_text()
        assert set(_ENUM.findall(source)) <= SHOWN, path.name
        named |= members_named(source)
    assert len(named) >= 15, named  # the scan found the page's uses, not nothing
    missing = sorted((e, n) for e, n in named if n not in core_enum(e).__members__)
    assert not missing, f"the core has no such member: {missing}"
