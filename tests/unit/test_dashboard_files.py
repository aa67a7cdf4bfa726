"""The dashboard's static files ship in a regular (non-editable) install.

An editable install reads them from the source tree, so only a build shows whether
setup.cfg's package_data carries them: setuptools' own build_py copies the packages into a
temporary directory, and every file the server loads must be there.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from coordinator.service.dashboard import UI_FILES, load_assets

ROOT = Path(__file__).resolve().parents[2]
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
    assert set(assets) == set(UI_FILES)
    for name, asset in assets.items():
        assert asset.body, name
        assert asset.content_type == UI_FILES[name]
