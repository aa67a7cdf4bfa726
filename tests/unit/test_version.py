"""The package version has one source (shared/version.py): the installed metadata, which
setup.cfg reads from it, and `ripple --version` say the same."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

from shared.version import PACKAGE_VERSION

ROOT = Path(__file__).resolve().parents[2]


def test_the_version_is_written_once() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", PACKAGE_VERSION)
    assert importlib.metadata.version("ripple") == PACKAGE_VERSION
    setup = (ROOT / "setup.cfg").read_text()
    assert "version = attr: shared.version.PACKAGE_VERSION" in setup
    assert PACKAGE_VERSION not in setup


def test_ripple_version_prints_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ripple.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == f"ripple {PACKAGE_VERSION}"


def test_the_changelog_has_an_entry_for_it() -> None:
    changelog = (ROOT / "docs" / "changelog.md").read_text()
    assert f"## {PACKAGE_VERSION}" in changelog
